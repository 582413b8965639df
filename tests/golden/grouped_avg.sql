-- query
SELECT sick, AVG(age) AS mean_age FROM people GROUP BY sick
-- rewritten
SELECT "domain"."sick" AS "sick", COALESCE("agg"."__m0", 0) AS "__m0", COALESCE("agg"."__m1", 0) AS "__m1" FROM (SELECT "d0"."sick" AS "sick" FROM (VALUES (FALSE), (TRUE)) AS d0(sick)) AS domain LEFT JOIN (SELECT "sick", SUM("__clamped_age") AS "__m0", COUNT("__clamped_age") AS "__m1" FROM dpsql_bounded.main."people" GROUP BY "sick") AS agg ON "domain"."sick" = "agg"."sick" ORDER BY "domain"."sick"
-- postprocess
SELECT "sick" AS "__o0", "__ci0", "__cs0", LEAST(GREATEST(TRY_CAST("__m0" AS DOUBLE) / TRY_CAST(GREATEST("__m1", 1) AS DOUBLE), 0), 100) AS "__o1", "__ci1", "__cs1" FROM noisy
-- noisy columns
sick BOOLEAN
__m0 BIGINT
__m1 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
-- measurements
__m0 SUM(age) integer=True mechanism=discrete_laplace sensitivity=400 scale=800.0
__m1 COUNT(age) integer=True mechanism=discrete_laplace sensitivity=4 scale=8.0
-- outputs
sick function=None from=
mean_age function=AVG from=__m0,__m1
