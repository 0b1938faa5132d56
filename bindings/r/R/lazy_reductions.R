# LazyTensor reductions with rkeops 2's signatures: the index ("i" or "j") positionally or by
# name, checked before any kernel is built; without an index sum/min/max/argmin/argmax are symbolic.

# A value as the user wrote it, for messages: "b", 3, NA, c("i", "j") (character of length 2).
describe_value <- function(v) {
  if (is.LazyTensor(v)) return("a LazyTensor")
  if (is.function(v)) return("a function")
  s <- deparse(v, width.cutoff = 60L, nlines = 1L)
  if (length(v) != 1) s <- paste0(s, " (", class(v)[1], " of length ", length(v), ")")
  s
}

# TRUE for "i" or "j", FALSE for NA where `allow_na` (no reduction: a symbolic operation);
# anything else is an error naming `who` and the argument.
check_index <- function(who, index, allow_na = FALSE) {
  if (is.character(index) && length(index) == 1 && index %in% c("i", "j")) return(TRUE)
  if (allow_na && length(index) == 1 && !is.LazyTensor(index) && is.atomic(index) &&
      is.na(index)) {
    return(FALSE)
  }
  lazy_fail(who, "argument 'index' must be \"i\" (reduce over i) or \"j\" (reduce over j)",
            if (allow_na) ", or NA for the symbolic operation over the inner dimension" else "",
            "; got ", describe_value(index))
}

check_lazy <- function(who, x) {
  if (!is.LazyTensor(x)) {
    lazy_fail(who, "argument 'x' must be a LazyTensor; got ", describe_value(x))
  }
}

check_k <- function(who, K) {
  ok <- is.numeric(K) && length(K) == 1 && !is.na(K) && K >= 1 && K == round(K)
  if (!ok) lazy_fail(who, "argument 'K' must be a whole number >= 1; got ", describe_value(K))
  as.integer(K)
}

# The LazyTensor and the index of sum(x, "j"), sum(x, index = "j") or sum(x): R's Summary group
# passes every argument through `...`, unnamed ones included.
summary_args <- function(who, args) {
  nm <- names(args)
  if (is.null(nm)) nm <- rep("", length(args))
  unknown <- nm[!nm %in% c("", "index")]
  if (length(unknown) > 0) {
    lazy_fail(who, "unknown argument(s) ", paste0("'", unknown, "'", collapse = ", "),
              "; the arguments are x and index")
  }
  given <- c(which(nm == "")[-1], which(nm == "index"))
  if (length(given) > 1) {
    lazy_fail(who, "takes one LazyTensor and one index (", who, "(x, \"j\")); got ",
              length(args), " arguments")
  }
  list(x = args[[which(nm == "")[1]]], index = if (length(given)) args[[given]] else NA)
}

# A reduction over `index`, or the symbolic operation when the index is NA.
reduce_or_symbolic <- function(who, x, op, index) {
  if (check_index(who, index, allow_na = TRUE)) reduction(x, op, index, who = who)
  else unary(as_lazy(x), op, 1L)
}

Summary.LazyTensor <- function(..., na.rm = FALSE) {
  op <- c(sum = "Sum", min = "Min", max = "Max")[.Generic]
  if (is.na(op)) lazy_fail(.Generic, "is not defined for LazyTensors")
  a <- summary_args(.Generic, list(...))
  reduce_or_symbolic(.Generic, a$x, op, a$index)
}

argmin <- function(x, index = NA) reduce_or_symbolic("argmin", x, "ArgMin", index)
argmax <- function(x, index = NA) reduce_or_symbolic("argmax", x, "ArgMax", index)
min_argmin <- function(x, index) reduction(x, "Min_ArgMin", index, who = "min_argmin")
max_argmax <- function(x, index) reduction(x, "Max_ArgMax", index, who = "max_argmax")
Kmin <- function(x, K, index) reduction(x, "KMin", index, K = K, who = "Kmin")
argKmin <- function(x, K, index) reduction(x, "ArgKMin", index, K = K, who = "argKmin")
Kmin_argKmin <- function(x, K, index) {
  reduction(x, "KMin_ArgKMin", index, K = K, who = "Kmin_argKmin")
}
logsumexp <- function(x, index, weight = NULL) {
  reduction(x, "LogSumExp", index, weight = weight, who = "logsumexp")
}
#' rkeops 2's order: the index, then the weight (a LazyTensor, e.g. Vj(b)).
sumsoftmaxweight <- function(x, index, weight) {
  if (missing(weight)) {
    lazy_fail("sumsoftmaxweight", "argument 'weight' is missing; write ",
              "sumsoftmaxweight(x, index, weight) (rkeops's order)")
  }
  reduction(x, "SumSoftMaxWeight", index, weight = weight, who = "sumsoftmaxweight")
}

# rkeops 2's *_reduction spellings: the same reductions, the index required.
sum_reduction <- function(x, index) reduction(x, "Sum", index, who = "sum_reduction")
min_reduction <- function(x, index) reduction(x, "Min", index, who = "min_reduction")
max_reduction <- function(x, index) reduction(x, "Max", index, who = "max_reduction")
argmin_reduction <- function(x, index) reduction(x, "ArgMin", index, who = "argmin_reduction")
argmax_reduction <- function(x, index) reduction(x, "ArgMax", index, who = "argmax_reduction")
min_argmin_reduction <- function(x, index) {
  reduction(x, "Min_ArgMin", index, who = "min_argmin_reduction")
}
max_argmax_reduction <- function(x, index) {
  reduction(x, "Max_ArgMax", index, who = "max_argmax_reduction")
}
Kmin_reduction <- function(x, K, index) reduction(x, "KMin", index, K = K, who = "Kmin_reduction")
argKmin_reduction <- function(x, K, index) {
  reduction(x, "ArgKMin", index, K = K, who = "argKmin_reduction")
}
Kmin_argKmin_reduction <- function(x, K, index) {
  reduction(x, "KMin_ArgKMin", index, K = K, who = "Kmin_argKmin_reduction")
}
logsumexp_reduction <- function(x, index, weight = NULL) {
  reduction(x, "LogSumExp", index, weight = weight, who = "logsumexp_reduction")
}
sumsoftmaxweight_reduction <- function(x, index, weight) {
  reduction(x, "SumSoftMaxWeight", index, weight = weight, who = "sumsoftmaxweight_reduction")
}

#' rkeops 2's generic form: opstr a KeOps reduction name ("Sum", "ArgKMin", ...), opt_arg K (a
#' number) or the weight (a LazyTensor).
reduction.LazyTensor <- function(x, opstr, index, opt_arg = NULL) {
  who <- "reduction.LazyTensor"
  if (!is.character(opstr) || length(opstr) != 1) {
    lazy_fail(who, "argument 'opstr' must be a reduction name such as \"Sum\"; got ",
              describe_value(opstr))
  }
  if (is.null(opt_arg)) return(reduction(x, opstr, index, who = who))
  if (is.LazyTensor(opt_arg)) return(reduction(x, opstr, index, weight = opt_arg, who = who))
  reduction(x, opstr, index, K = opt_arg, who = who)
}

#' A reduction of a LazyTensor over "i" or "j": op is a KeOps reduction name ("Sum", "Min",
#' "ArgKMin", ...); indices (ArgMin, ...) are 0-based, as in rkeops and KeOps.
reduction <- function(x, op, index, K = NULL, weight = NULL, who = "reduction") {
  check_lazy(who, x)
  if (!is.null(K)) K <- check_k(who, K)
  check_index(who, index)
  if (!is.null(weight) && !is.LazyTensor(weight) && !is.numeric(weight)) {
    lazy_fail(who, "argument 'weight' must be a LazyTensor (e.g. Vj(w)); got ",
              describe_value(weight))
  }
  tag <- if (index == "j") 0L else 1L
  vars <- x$vars
  texts <- x$formula
  if (!is.null(weight)) {
    weight <- as_lazy(weight)
    vars <- merge_vars(x, weight)
    texts <- c(texts, weight$formula)
  }
  t <- lazy_text(texts, vars)
  body <- t$texts[1]
  if (!is.null(K)) body <- paste0(body, ",", K)
  body <- paste0(body, ",", tag)
  if (!is.null(weight)) body <- paste0(body, ",", t$texts[2])
  label <- sprintf("%s reduction (index = \"%s\"; variables a0, a1, ... in order of appearance)",
                   op, index)
  lazy_eval(paste0(op, "_Reduction(", body, ")"), t$aliases, t$data, label)
}
