% test_large: a Gaussian kernel product at N = M = 1e5 in D = 3, which no dense matrix could hold
% (80 GB), checked on a few rows computed densely, one row at a time.
function test_large()
  rand('seed', 5);
  n = 1e5;
  x = rand(3, n); y = rand(3, n); b = randn(2, n); p = 4;
  F = gauss_kernel();
  r = F(x, y, b, p);
  check(isequal(size(r), [2 n]), 'size %s', mat2str(size(r)));
  for i = [1 2 777 n/2 n]
    row = exp(-p * sum((x(:, i) - y) .^ 2, 1)) * b';
    check_close(r(:, i), row', 1e-10, 1e-10, sprintf('row %d', i));
  end
end
