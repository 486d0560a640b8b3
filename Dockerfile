# Airflow 3.3.2 with airflow-crashsafe installed against the project's lock (with its celery extra:
# the compose file's Celery profile runs Celery workers and watches their broker).
FROM apache/airflow:3.3.2-python3.11

# State the deployment writes, created and owned here by the image's user (airflow, uid 50000,
# gid 0 as in the base image): Docker fills a new named volume from the image's directory, owner
# included, so the volumes mounted on these paths are writable without a root init step. The
# watchdogs' state (incidents, outbox: an unwritable one delivers no alert), the alerting DAG's,
# and the SimpleAuthManager passwords file that airflow-init writes from .env.
USER root
RUN mkdir -p /var/lib/crashsafe/api /var/lib/crashsafe/db /var/lib/crashsafe/celery /opt/airflow/crashsafe-alerting \
        /opt/airflow/simple-auth \
    && chown -R 50000:0 /var/lib/crashsafe /opt/airflow/crashsafe-alerting /opt/airflow/simple-auth \
    && chmod -R u+rwX,g+rwX /var/lib/crashsafe /opt/airflow/crashsafe-alerting /opt/airflow/simple-auth
USER airflow

COPY --chown=airflow:root pyproject.toml README.md LICENSE NOTICE /opt/crashsafe/
COPY --chown=airflow:root constraints /opt/crashsafe/constraints
COPY --chown=airflow:root airflow_crashsafe /opt/crashsafe/airflow_crashsafe
RUN pip install --no-cache-dir -c /opt/crashsafe/constraints/py3.11.txt '/opt/crashsafe[prometheus,celery]'
