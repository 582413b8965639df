-- query
SELECT COUNT(p.age) FROM people AS p WHERE p.sick
-- rewritten
SELECT COUNT("age") AS "__m0" FROM dpsql_bounded.main."people" WHERE "sick"
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 COUNT(age) integer=True mechanism=discrete_laplace sensitivity=2 scale=2.0
-- outputs
COUNT(p.age) function=COUNT from=__m0
