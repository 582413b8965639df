-- query
SELECT state, sick, COUNT(*) AS n, SUM(income) FROM people GROUP BY state, sick
-- rewritten
SELECT "domain"."state" AS "state", "domain"."sick" AS "sick", COALESCE("agg"."__m0", 0) AS "__m0", COALESCE("agg"."__m1", 0) AS "__m1" FROM (SELECT "d0"."state" AS "state", "d1"."sick" AS "sick" FROM (VALUES ('CA'), ('NY'), ('TX'), ('WA')) AS d0(state) CROSS JOIN (VALUES (FALSE), (TRUE)) AS d1(sick)) AS domain LEFT JOIN (SELECT "state", "sick", COUNT(*) AS "__m0", SUM("__clamped_income") AS "__m1" FROM dpsql_bounded.main."people" GROUP BY "state", "sick") AS agg ON "domain"."state" = "agg"."state" AND "domain"."sick" = "agg"."sick" ORDER BY "domain"."state", "domain"."sick"
-- postprocess
SELECT "state" AS "__o0", "__ci0", "__cs0", "sick" AS "__o1", "__ci1", "__cs1", "__m0" AS "__o2", "__ci2", "__cs2", "__m1" AS "__o3", "__ci3", "__cs3" FROM noisy
-- noisy columns
state VARCHAR
sick BOOLEAN
__m0 BIGINT
__m1 DOUBLE
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
__ci2 DOUBLE
__cs2 DOUBLE
__ci3 DOUBLE
__cs3 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=4 scale=8.0
__m1 SUM(income) integer=False mechanism=laplace sensitivity=4000.0 scale=8000.0
-- outputs
state function=None from=
sick function=None from=
n function=COUNT from=__m0
SUM(income) function=SUM from=__m1
