% check_close: a, b equal within atol + rtol |b| elementwise, with the same size; the message
% says where they differ most.
function check_close(a, b, rtol, atol, what)
  check(isequal(size(a), size(b)), '%s: size %s, expected %s', what, mat2str(size(a)), ...
        mat2str(size(b)));
  err = abs(double(a) - double(b)) - (atol + rtol * abs(double(b)));
  [worst, at] = max(err(:));
  check(~any(isnan(double(a(:)))) && worst <= 0, ...
        '%s: element %d is %.17g, expected %.17g', what, at, a(at), b(at));
end
