-- query
SELECT AVG(income) FROM people
-- rewritten
SELECT COALESCE(SUM("__clamped_income"), 0) AS "__m0", COUNT("__clamped_income") AS "__m1" FROM dpsql_bounded.main."people"
-- postprocess
SELECT LEAST(GREATEST(TRY_CAST("__m0" AS DOUBLE) / TRY_CAST(GREATEST("__m1", 1) AS DOUBLE), 0.0), 1000.0) AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 DOUBLE
__m1 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 SUM(income) integer=False mechanism=laplace sensitivity=2000.0 scale=4000.0
__m1 COUNT(income) integer=True mechanism=discrete_laplace sensitivity=2 scale=4.0
-- outputs
AVG(income) function=AVG from=__m0,__m1
