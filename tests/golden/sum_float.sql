-- query
SELECT SUM(income) AS total FROM people
-- rewritten
SELECT COALESCE(SUM("__clamped_income"), 0) AS "__m0" FROM dpsql_bounded.main."people"
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 DOUBLE
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 SUM(income) integer=False mechanism=laplace sensitivity=2000.0 scale=2000.0
-- outputs
total function=SUM from=__m0
