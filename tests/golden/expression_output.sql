-- query
SELECT state, SUM(income) / COUNT(*) + 1 AS ratio FROM people GROUP BY state
-- rewritten
SELECT "domain"."state" AS "state", COALESCE("agg"."__m0", 0) AS "__m0", COALESCE("agg"."__m1", 0) AS "__m1" FROM (SELECT "d0"."state" AS "state" FROM (VALUES ('CA'), ('NY'), ('TX'), ('WA')) AS d0(state)) AS domain LEFT JOIN (SELECT "state", SUM("__clamped_income") AS "__m0", COUNT(*) AS "__m1" FROM dpsql_bounded.main."people" GROUP BY "state") AS agg ON "domain"."state" = "agg"."state" ORDER BY "domain"."state"
-- postprocess
SELECT "state" AS "__o0", "__ci0", "__cs0", TRY_CAST(TRY_CAST("__m0" AS DOUBLE) / TRY_CAST("__m1" AS DOUBLE) AS DOUBLE) + TRY_CAST(1 AS DOUBLE) AS "__o1", "__ci1", "__cs1" FROM noisy
-- noisy columns
state VARCHAR
__m0 DOUBLE
__m1 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
-- measurements
__m0 SUM(income) integer=False mechanism=laplace sensitivity=4000.0 scale=8000.0
__m1 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=4 scale=8.0
-- outputs
state function=None from=
ratio function=None from=__m0,__m1
