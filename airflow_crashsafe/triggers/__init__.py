"""Triggers the crashsafe operators defer to (they run in Airflow's triggerer)."""
