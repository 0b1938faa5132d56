# Every reduction family over both axes (the interpreter: no compile per formula), against dense
# references; indices are 0-based, as in rkeops and KeOps.

x <- points(9, 3, 11)
y <- points(13, 3, 12)

# Reference of one reduction of the dense matrix d (outer x inner), row by row.
dense_reduce <- function(op, d, w = NULL, k = 3) {
  rows <- function(f) {
    r <- lapply(seq_len(nrow(d)), function(i) f(d[i, ], i))
    do.call(rbind, r)
  }
  switch(op,
    Sum = matrix(rowSums(d)),
    Min = rows(function(r, i) min(r)),
    Max = rows(function(r, i) max(r)),
    ArgMin = rows(function(r, i) which.min(r) - 1),
    ArgMax = rows(function(r, i) which.max(r) - 1),
    KMin = rows(function(r, i) sort(r)[1:k]),
    ArgKMin = rows(function(r, i) order(r)[1:k] - 1),
    LogSumExp = rows(function(r, i) log(sum(exp(-r)))),
    LogSumExpW = rows(function(r, i) log(sum(exp(-r) * w))),
    SoftMax = rows(function(r, i) colSums(exp(-r) * w) / sum(exp(-r)))
  )
}

for (tag in 0:1) {
  # tag 0 reduces over j (one row per x_i), tag 1 over i (one row per y_j).
  d <- if (tag == 0) sqdist_matrix(x, y) else t(sqdist_matrix(x, y))
  inner <- if (tag == 0) "Vj" else "Vi"
  n_inner <- ncol(d)
  w1 <- points(n_inner, 1, 13)
  w2 <- points(n_inner, 2, 14)
  args <- c("X = Vi(3)", "Y = Vj(3)", paste0("W = ", inner, "(1)"), paste0("V = ", inner, "(2)"))
  run <- function(text) {
    k <- tessel_reduction(text, args, backend = "interpreter")
    k(x, y, w1, w2)
  }
  red <- function(name, extra = "") paste0(name, "_Reduction(SqDist(X,Y),", extra, tag, ")")

  test_that(paste("Sum, Min, Max and their indices, tag", tag), {
    for (op in c("Sum", "Min", "Max", "ArgMin", "ArgMax")) {
      expect_equal(run(red(op)), dense_reduce(op, d), tolerance = 1e-12, info = op)
    }
    both <- run(red("Min_ArgMin"))
    expect_equal(both$values, dense_reduce("Min", d), tolerance = 1e-12)
    expect_equal(both$indices, dense_reduce("ArgMin", d))
    both <- run(red("Max_ArgMax"))
    expect_equal(both$values, dense_reduce("Max", d), tolerance = 1e-12)
    expect_equal(both$indices, dense_reduce("ArgMax", d))
  })

  test_that(paste("KMin, ArgKMin and KMin_ArgKMin, tag", tag), {
    expect_equal(run(red("KMin", "3,")), dense_reduce("KMin", d), tolerance = 1e-12)
    expect_equal(run(red("ArgKMin", "3,")), dense_reduce("ArgKMin", d))
    both <- run(red("KMin_ArgKMin", "3,"))
    expect_equal(both$values, dense_reduce("KMin", d), tolerance = 1e-12)
    expect_equal(both$indices, dense_reduce("ArgKMin", d))
  })

  test_that(paste("LogSumExp (with and without weight) and SumSoftMaxWeight, tag", tag), {
    lse <- paste0("LogSumExp_Reduction(-SqDist(X,Y),", tag, ")")
    expect_equal(run(lse), dense_reduce("LogSumExp", d), tolerance = 1e-12)
    lsew <- paste0("LogSumExp_Reduction(-SqDist(X,Y),", tag, ",W)")
    expect_equal(run(lsew), dense_reduce("LogSumExpW", d, w = w1), tolerance = 1e-12)
    ssw <- paste0("SumSoftMaxWeight_Reduction(-SqDist(X,Y),", tag, ",V)")
    expect_equal(run(ssw), dense_reduce("SoftMax", d, w = w2), tolerance = 1e-12)
  })
}

test_that("gradients through LogSumExp and Min (over i) match the dense ones", {
  args <- c("X = Vi(3)", "Y = Vj(3)")
  eta <- points(13, 1, 15)
  lse <- tessel_reduction("LogSumExp_Reduction(-SqDist(X,Y), 1)", args, backend = "interpreter")
  loss <- function(p) sum(eta * log(colSums(exp(-sqdist_matrix(p, y)))))
  expect_equal(tessel_grad(lse, "X")(x, y, eta), numeric_grad(loss, x), tolerance = 1e-7)
  mn <- tessel_reduction("Min_Reduction(SqDist(X,Y), 1)", args, backend = "interpreter")
  loss <- function(p) sum(eta * apply(sqdist_matrix(x, p), 2, min))
  expect_equal(tessel_grad(mn, "Y")(x, y, eta), numeric_grad(loss, y), tolerance = 1e-7)
})
