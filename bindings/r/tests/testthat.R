# Runs the package's testthat suite under R CMD check (scripts/test_r.sh runs it directly).
library(testthat)
library(tessel)
test_check("tessel")
