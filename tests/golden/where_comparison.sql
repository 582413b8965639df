-- query
SELECT COUNT(*) FROM people WHERE age >= 18 AND income < 500.5
-- rewritten
SELECT COUNT(*) AS "__m0" FROM dpsql_bounded.main."people" WHERE "age" >= 18 AND "income" < TRY_CAST(500.5 AS DOUBLE)
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=2 scale=2.0
-- outputs
COUNT(*) function=COUNT from=__m0
