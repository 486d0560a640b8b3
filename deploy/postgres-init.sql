-- The crashsafe store lives in its own database beside Airflow's metadata database.
CREATE DATABASE crashsafe OWNER airflow;
-- A warehouse for the example DAGs (use your real warehouse connection in production).
CREATE DATABASE warehouse OWNER airflow;
