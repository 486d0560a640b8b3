"""One router per resource; each serves its JSON under ``/api/...`` and its page beside it."""
