"""Formats that are secrets wherever they appear, with no name beside them."""

from __future__ import annotations

import re

__all__ = ["AWS_KEY_ID", "AWS_SECRET", "PRIVATE_KEY", "TOKENS"]

#: Token formats vendors give their credentials so that scanners can find them (GitHub, GitLab,
#: Slack, AWS, Stripe, Google, SendGrid, Twilio, npm, PyPI, NuGet, OpenAI/Anthropic, Databricks,
#: Hugging Face, Shopify, Atlassian, Doppler, Mailgun, Mailchimp, Mapbox, Postman, DigitalOcean,
#: Vault, Grafana, age, Linear, Notion, Square, Sentry, Telegram, Discord, RubyGems, Docker Hub,
#: New Relic, Artifactory, Azure DevOps, Tavily, Jina, Twitch, Adafruit, Dependency-Track), JWTs,
#: and crypt(3)/bcrypt password hashes.
TOKENS = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+){0,2}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|gl(?:pat|dt|rt|ptt|cbt|imt|soat|ft|oas|agent)-[A-Za-z0-9_-]{20,}"
    r"|xox[abeoprs]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9+/=]{20,}"
    r"|AIza[0-9A-Za-z_-]{35}|GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[0-9A-Za-z_-]{20,}|1//0[0-9A-Za-z_-]{30,}"
    r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}|SK[0-9a-fA-F]{32}|npm_[A-Za-z0-9]{36}"
    r"|pypi-[A-Za-z0-9_-]{50,}|sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
    r"|dapi[0-9a-f]{32}(?:-\d+)?|hf_[A-Za-z0-9]{30,}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"
    r"|ATATT[A-Za-z0-9_=-]{50,}|dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}|key-[0-9a-f]{32}"
    r"|PMAK-[0-9a-f]{24}-[0-9a-f]{34}|do[opr]_v1_[a-f0-9]{64}|hv[sbr]\.[A-Za-z0-9_-]{20,}"
    r"|glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|AGE-SECRET-KEY-1[0-9A-Z]{58}"
    r"|lin_api_[A-Za-z0-9]{40}|(?:secret|ntn)_[A-Za-z0-9]{40,}|sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}"
    r"|sntr[ysu]s_[A-Za-z0-9+/=_-]{40,}|\d{5,}:AA[A-Za-z0-9_-]{30,}|rubygems_[0-9a-f]{48}"
    r"|[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}"
    r"|dckr_pat_[A-Za-z0-9_-]{20,}|NR(?:AK|AA|IQ|JS|II)-[A-Za-z0-9_-]{20,}|[a-f0-9]{36}NRAL"
    r"|AKCp[A-Za-z0-9]{60,}|[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4}|tvly-[A-Za-z0-9]{20,}|jina_[A-Za-z0-9]{40,}"
    r"|live_\d{6,}_[A-Za-z0-9]{20,}|aio_[A-Za-z0-9]{28}|odt_[A-Za-z0-9]{32,}|oy2[a-z0-9]{43}"
    r"|[0-9a-f]{32}-us\d{1,2}|(?:pk|sk|tk)\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
    r"|dp\.(?:pt|st|sa|ct|scim|audit)\.[a-z0-9_-]{1,40}\.[A-Za-z0-9]{40,}|GR1348941[A-Za-z0-9_-]{20,}"
    r"|s\.(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{24,}|00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{20,}"
    r"|\$2[abxy]?\$\d{2}\$[./A-Za-z0-9]{53}|\$[156]\$(?:rounds=\d+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}"
    r"|\$argon2(?:id|i|d)\$[^\s\"']{20,}"
    r")"
)
#: A PEM private key (RSA, EC, OpenSSH, PKCS#8, PGP, encrypted): its body, to the END line.
PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?P<body>.*?)"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
#: An AWS access key id; a 40-character secret access key beside it is masked too.
AWS_KEY_ID = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}")
AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
