BEGIN;
DELETE FROM mart.daily_events WHERE day = '{{ ds }}';
INSERT INTO mart.daily_events (day, kind, n)
SELECT day, kind, count(*) FROM mart.fact_events WHERE day = '{{ ds }}' GROUP BY day, kind;
COMMIT;
