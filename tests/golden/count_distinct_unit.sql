-- query
SELECT COUNT(DISTINCT person_id) FROM people
-- rewritten
SELECT COALESCE(CAST(COUNT(DISTINCT "person_id") AS DOUBLE) + (CAST(COUNT(*) AS DOUBLE) - CAST(COUNT("person_id") AS DOUBLE)), 0) AS "__m0" FROM dpsql_bounded.main."people"
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 COUNT(DISTINCT unit) integer=True mechanism=discrete_laplace sensitivity=1 scale=1.0
-- outputs
COUNT(DISTINCT person_id) function=COUNT from=__m0
