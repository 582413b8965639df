-- query
SELECT state, COUNT(*) FROM people GROUP BY state
-- rewritten
SELECT "domain"."state" AS "state", COALESCE("agg"."__m0", 0) AS "__m0" FROM (SELECT "d0"."state" AS "state" FROM (VALUES ('CA'), ('NY'), ('TX'), ('WA')) AS d0(state)) AS domain LEFT JOIN (SELECT "state", COUNT(*) AS "__m0" FROM dpsql_bounded.main."people" GROUP BY "state") AS agg ON "domain"."state" = "agg"."state" ORDER BY "domain"."state"
-- postprocess
SELECT "state" AS "__o0", "__ci0", "__cs0", "__m0" AS "__o1", "__ci1", "__cs1" FROM noisy
-- noisy columns
state VARCHAR
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=4 scale=4.0
-- outputs
state function=None from=
COUNT(*) function=COUNT from=__m0
