-- query
SELECT SUM(age) FROM people
-- rewritten
SELECT COALESCE(SUM("__clamped_age"), 0) AS "__m0" FROM dpsql_bounded.main."people"
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 SUM(age) integer=True mechanism=discrete_laplace sensitivity=200 scale=200.0
-- outputs
SUM(age) function=SUM from=__m0
