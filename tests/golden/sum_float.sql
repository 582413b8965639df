-- query
SELECT SUM(income) AS total FROM people
-- rewritten
SELECT COALESCE("agg"."__m0", 0) AS "__m0" FROM (SELECT SUM(CASE WHEN CAST("income" AS DOUBLE) < 0.0 THEN 0.0 WHEN CAST("income" AS DOUBLE) > 1000.0 THEN 1000.0 ELSE CAST("income" AS DOUBLE) END) AS "__m0" FROM (SELECT "income" FROM dpsql_bounded.main."people") AS rows) AS agg
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
