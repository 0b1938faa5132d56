// What the R package's entry points share: the core's errors returned to R as values, which R
// re-signals with the user's call, and the GP entry points' declarations for registration.
#pragma once

#include <Rcpp.h>

#include <exception>

namespace tessel_r {

// An error as a value: R re-signals it as a condition with the user's call (cheaper per call
// than a tryCatch around every .Call, and the message stays exactly the core's).
inline SEXP error_value(const char* what) {
  Rcpp::CharacterVector v = Rcpp::CharacterVector::create(what);
  v.attr("class") = "tessel_core_error";
  return v;
}

// An entry point's body, with its errors returned as values (error_value); BEGIN_RCPP /
// END_RCPP pass R's own conditions (an interrupt) on as R expects.
template <class Body>
SEXP guarded(Body&& body) {
  BEGIN_RCPP
  try {
    return body();
  } catch (const std::exception& e) {
    return error_value(e.what());
  }
  END_RCPP
}

}  // namespace tessel_r

extern "C" {
SEXP tessel_r_gp_mll(SEXP text, SEXP aliases, SEXP x, SEXP theta, SEXP y, SEXP noise, SEXP exact,
                     SEXP probes, SEXP rank, SEXP seed);
SEXP tessel_r_gp_predict(SEXP text, SEXP aliases, SEXP x, SEXP theta, SEXP noise, SEXP alpha,
                         SEXP xnew, SEXP rank, SEXP tol, SEXP chunk);
}
