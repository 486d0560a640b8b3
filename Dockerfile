# Airflow 3.3.2 with airflow-crashsafe installed against the project's lock (with its celery extra:
# the compose file's Celery profile runs Celery workers and watches their broker).
FROM apache/airflow:3.3.2-python3.11
COPY --chown=airflow:root pyproject.toml README.md /opt/crashsafe/
COPY --chown=airflow:root constraints /opt/crashsafe/constraints
COPY --chown=airflow:root airflow_crashsafe /opt/crashsafe/airflow_crashsafe
RUN pip install --no-cache-dir -c /opt/crashsafe/constraints/py3.11.txt "/opt/crashsafe[celery]"
