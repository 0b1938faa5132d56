# Without a working compiler, the default backend runs the tile interpreter (a fresh R process:
# the core looks for its compiler once per process).

test_that("the interpreter serves the default backend when no compiler is found", {
  lib <- dirname(find.package("tessel"))
  script <- tempfile(fileext = ".R")
  writeLines(c(
    sprintf("suppressMessages(library(tessel, lib.loc = '%s'))", lib),
    "k <- tessel_reduction('Sum_Reduction(SqDist(X,Y)*B, 0)',",
    "                      c('X = Vi(2)', 'Y = Vj(2)', 'B = Vj(1)'))",
    "r <- tessel_runtime()",
    "x <- matrix(c(0, 1, 2, 0, 1, 2), 3); y <- matrix(c(1, 3, 1, 3), 2)",
    "cat(r$compiler_usable, k(x, y, c(1, 2)), '\\n')"
  ), script)
  env <- c(sprintf("TESSEL_CXX=%s", file.path(tempdir(), "no-such-compiler")),
           sprintf("TESSEL_CACHE_DIR=%s", file.path(tempdir(), "empty-cache")))
  out <- system2(file.path(R.home("bin"), "Rscript"), script, env = env, stdout = TRUE,
                 stderr = TRUE)
  line <- strsplit(trimws(out[length(out)]), " +")[[1]]
  x <- matrix(c(0, 1, 2, 0, 1, 2), 3)
  y <- matrix(c(1, 3, 1, 3), 2)
  expect_equal(line[1], "FALSE", info = paste(out, collapse = "\n"))
  expect_equal(as.numeric(line[-1]), as.vector(sqdist_matrix(x, y) %*% c(1, 2)))
})
