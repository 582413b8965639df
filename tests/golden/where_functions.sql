-- query
SELECT COUNT(*) FROM people WHERE LOWER(TRIM(note)) = 'row' AND ROUND(income / 3, 1) > ABS(age - 40) AND LENGTH(SUBSTRING(note, 1, 2)) = 2
-- rewritten
SELECT COUNT(*) AS "__m0" FROM dpsql_bounded.main."people" WHERE LOWER(TRIM("note")) = 'row' AND ROUND(TRY_CAST(TRY_CAST("income" AS DOUBLE) / TRY_CAST(3 AS DOUBLE) AS DOUBLE), 1) > ABS(TRY_CAST(TRY_CAST("age" AS DOUBLE) - TRY_CAST(40 AS DOUBLE) AS DOUBLE)) AND LENGTH(SUBSTRING("note", TRY_CAST(1 AS INT), TRY_CAST(2 AS INT))) = 2
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
