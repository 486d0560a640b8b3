-- Load yesterday's events into the fact table
INSERT INTO mart.fact_events (event_id, day, kind)
SELECT event_id, day, kind FROM staging.events WHERE day = '{{ ds }}';
