# Dense R references (the whole N x M matrix, small N only) the tests compare tessel with.

sqdist_matrix <- function(x, y) {
  pmax(outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y), 0)
}

gauss_matrix <- function(x, y, g) exp(-g * sqdist_matrix(x, y))

# The gradient in x of <eta, K(x, y) b>, K Gaussian with scale g.
gauss_grad_x <- function(x, y, b, g, eta) {
  w <- (eta %*% t(b)) * gauss_matrix(x, y, g)
  -2 * g * (rowSums(w) * x - w %*% y)
}

# Central differences of a scalar function f at the matrix p.
numeric_grad <- function(f, p, h = 1e-5) {
  out <- p
  for (q in seq_along(p)) {
    up <- p
    dn <- p
    up[q] <- up[q] + h
    dn[q] <- dn[q] - h
    out[q] <- (f(up) - f(dn)) / (2 * h)
  }
  out
}

points <- function(n, d, seed) {
  set.seed(seed)
  matrix(stats::runif(n * d), n, d)
}

gauss_args <- c("X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)")
gauss_text <- "Sum_Reduction(Exp(-G*SqDist(X,Y))*B, 0)"
