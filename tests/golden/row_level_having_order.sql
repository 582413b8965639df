-- query
SELECT clinic, COUNT(*) AS n FROM visits GROUP BY clinic HAVING n >= 1 ORDER BY clinic DESC LIMIT 1
-- rewritten
SELECT "domain"."clinic" AS "clinic", COALESCE("agg"."__m0", 0) AS "__m0" FROM (SELECT "d0"."clinic" AS "clinic" FROM (VALUES ('north'), ('south')) AS d0(clinic)) AS domain LEFT JOIN (SELECT "clinic", COUNT(*) AS "__m0" FROM visits GROUP BY "clinic") AS agg ON "domain"."clinic" = "agg"."clinic" ORDER BY "domain"."clinic"
-- postprocess
SELECT "clinic" AS "__o0", "__ci0", "__cs0", "__m0" AS "__o1", "__ci1", "__cs1" FROM noisy WHERE "__m0" >= 1 ORDER BY "clinic" DESC LIMIT 1
-- noisy columns
clinic VARCHAR
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=2 scale=2.0
-- outputs
clinic function=None from=
n function=COUNT from=__m0
