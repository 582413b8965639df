-- query
SELECT COUNT(*) FROM visits
-- rewritten
SELECT COUNT(*) AS "__m0" FROM visits
-- postprocess
SELECT "__m0" AS "__o0", "__ci0", "__cs0" FROM noisy
-- noisy columns
__m0 BIGINT
__ci0 DOUBLE
__cs0 DOUBLE
-- measurements
__m0 COUNT(*) integer=True mechanism=discrete_laplace sensitivity=1 scale=1.0
-- outputs
COUNT(*) function=COUNT from=__m0
