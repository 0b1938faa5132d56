# The fixed cost of a cached tessel call from R, against the same call from C++.
#
# Usage (from the repository root, the package installed by scripts/test_r.sh):
#   R_LIBS=build/r-lib Rscript bench/r_overhead.R
# Prints JSON lines: medians over batches of calls of the R kernel function, of the bare .Call
# under it, and of a LazyTensor reduction, at N = M = 1 and N = M = 1000, in float64 and float32;
# then `build/tessel bench call-overhead` and `gauss-sum` at the same sizes (C++, one line each).
# The case is the C++ bench's gauss-sum: Sum_j exp(-G |x_i - y_j|^2) b_j, D = 3.
suppressMessages(library(tessel))

text <- "Sum_Reduction(Exp(-G*SqDist(X,Y))*B, 0)"
aliases <- c("X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)")

# Median seconds per call over `batches` batches, each timing enough calls to last ~20 ms.
time_call <- function(f, batches = 15) {
  f()
  reps <- 1
  repeat {
    t <- system.time(for (k in seq_len(reps)) f())[["elapsed"]]
    if (t > 0.02 || reps >= 1e6) break
    reps <- reps * 4
  }
  stats::median(vapply(seq_len(batches), function(b) {
    system.time(for (k in seq_len(reps)) f())[["elapsed"]] / reps
  }, 0))
}

json <- function(...) {
  v <- list(...)
  fmt <- vapply(v, function(x) if (is.character(x)) sprintf("\"%s\"", x) else format(x, digits = 4),
                "")
  cat("{", paste0("\"", names(v), "\": ", fmt, collapse = ", "), "}\n", sep = "")
}

set.seed(1)
for (n in c(1, 1000)) {
  x <- matrix(stats::runif(n * 3), n, 3)
  y <- matrix(stats::runif(n * 3), n, 3)
  b <- matrix(stats::runif(n), n, 1)
  for (precision in c("double", "float")) {
    dtype <- if (precision == "double") "float64" else "float32"
    k <- tessel_reduction(text, aliases, precision = precision)
    ptr <- attr(k, "tessel_kernel")
    args <- list(x, y, b, 16)
    json(case = "r-kernel-call", n = n, m = n, d = 3, dtype = dtype,
         median_s = time_call(function() k(x, y, b, 16)))
    json(case = "r-dotcall", n = n, m = n, d = 3, dtype = dtype,
         median_s = time_call(function() .Call(tessel:::tessel_r_eval, ptr, args, FALSE)))
    if (precision == "double") {
      json(case = "r-lazytensor", n = n, m = n, d = 3, dtype = dtype,
           median_s = time_call(function() exp(-16 * sqdist(Vi(x), Vj(y))) %*% b))
    }
  }
}

build <- Sys.getenv("TESSEL_BUILD_DIR", "build")
tool <- file.path(build, "tessel")
if (file.exists(tool)) {
  for (dtype in c("float64", "float32")) {
    out <- system2(tool, c("bench", "call-overhead", "--dtype", dtype), stdout = TRUE)
    cat(grep("\"call-overhead\"", out, value = TRUE), sep = "\n")
    out <- system2(tool, c("bench", "gauss-sum", "--n", "1000", "--reps", "15", "--dtype", dtype,
                           "--keep-cache", "--no-pykeops"), stdout = TRUE)
    cat(grep("\"gauss-sum\"", out, value = TRUE), sep = "\n")
  }
} else {
  cat("# no", tool, "here: run `build/tessel bench call-overhead` for the C++ figure\n")
}
