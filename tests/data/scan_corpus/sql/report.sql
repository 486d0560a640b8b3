SELECT kind, count(*) AS n
FROM mart.fact_events
WHERE day = '{{ ds }}'  -- the insert job above fills this
GROUP BY kind;
