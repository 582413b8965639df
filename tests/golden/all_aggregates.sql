-- query
SELECT COUNT(*), COUNT(DISTINCT person_id), SUM(age), AVG(income) FROM people
-- rewritten
SELECT COUNT(*) AS "__m0", COALESCE(CAST(COUNT(DISTINCT "person_id") AS DOUBLE) + (CAST(COUNT(*) AS DOUBLE) - CAST(COUNT("person_id") AS DOUBLE)), 0) AS "__m1", COALESCE(SUM("__clamped_age"), 0) AS "__m2", COALESCE(SUM("__clamped_income"), 0) AS "__m3", COUNT("__clamped_income") AS "__m4" FROM dpsql_bounded.main."people"
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0", "__m1" AS "__o1", "__ci1", "__cs1", "__m2" AS "__o2", "__ci2", "__cs2", LEAST(GREATEST(TRY_CAST("__m3" AS DOUBLE) / TRY_CAST(GREATEST("__m4", 1) AS DOUBLE), 0.0), 1000.0) AS "__o3", "__ci3", "__cs3" FROM noisy
-- noisy columns
__m0 BIGINT
__m1 BIGINT
__m2 BIGINT
__m3 DOUBLE
__m4 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
__ci1 DOUBLE
__cs1 DOUBLE
__ci2 DOUBLE
__cs2 DOUBLE
__ci3 DOUBLE
__cs3 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=2 scale=10.0
__m1 COUNT(DISTINCT unit) integer=True mechanism=discrete_laplace sensitivity=1 scale=5.0
__m2 SUM(age) integer=True mechanism=discrete_laplace sensitivity=200 scale=1000.0
__m3 SUM(income) integer=False mechanism=laplace sensitivity=2000.0 scale=10000.0
__m4 COUNT(income) integer=True mechanism=discrete_laplace sensitivity=2 scale=10.0
-- outputs
COUNT(*) function=COUNT from=__m0
COUNT(DISTINCT person_id) function=COUNT from=__m1
SUM(age) function=SUM from=__m2
AVG(income) function=AVG from=__m3,__m4
