-- query
SELECT clinic, urgent, AVG(minutes), SUM(minutes) FROM visits WHERE minutes > 5 GROUP BY clinic, urgent
-- rewritten
SELECT "domain"."clinic" AS "clinic", "domain"."urgent" AS "urgent", COALESCE("agg"."__m0", 0) AS "__m0", COALESCE("agg"."__m1", 0) AS "__m1" FROM (SELECT "d0"."clinic" AS "clinic", "d1"."urgent" AS "urgent" FROM (VALUES ('north'), ('south')) AS d0(clinic) CROSS JOIN (VALUES (FALSE), (TRUE)) AS d1(urgent)) AS domain LEFT JOIN (SELECT "clinic", "urgent", SUM("__clamped_minutes") AS "__m0", COUNT("__clamped_minutes") AS "__m1" FROM dpsql_bounded.main."visits" WHERE "minutes" > 5 GROUP BY "clinic", "urgent") AS agg ON "domain"."clinic" = "agg"."clinic" AND "domain"."urgent" = "agg"."urgent" ORDER BY "domain"."clinic", "domain"."urgent"
-- postprocess
SELECT "clinic" AS "__o0", "__ci0", "__cs0", "urgent" AS "__o1", "__ci1", "__cs1", LEAST(GREATEST(TRY_CAST("__m0" AS DOUBLE) / TRY_CAST(GREATEST("__m1", 1) AS DOUBLE), 0.0), 120.0) AS "__o2", "__ci2", "__cs2", "__m0" AS "__o3", "__ci3", "__cs3" FROM noisy
-- noisy columns
clinic VARCHAR
urgent BOOLEAN
__m0 DOUBLE
__m1 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
__ci2 DOUBLE
__cs2 DOUBLE
__ci3 DOUBLE
__cs3 DOUBLE
-- measurements
__m0 SUM(minutes) integer=False mechanism=laplace sensitivity=240.0 scale=480.0
__m1 COUNT(minutes) integer=True mechanism=discrete_laplace sensitivity=2 scale=4.0
-- outputs
clinic function=None from=
urgent function=None from=
AVG(minutes) function=AVG from=__m0,__m1
SUM(minutes) function=SUM from=__m0
