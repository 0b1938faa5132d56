% test_single: single arrays run in float32 and give single results, within a float32 bound of
% the double ones; one single argument is enough (the others are converted), and indices come
% back as single too.
function test_single()
  randn('seed', 4);
  x = randn(3, 40); y = randn(3, 30); b = randn(2, 30); p = 0.7;
  F = gauss_kernel();
  r64 = F(x, y, b, p);
  r32 = F(single(x), single(y), single(b), single(p));
  check(isa(r32, 'single') && isa(r64, 'double'), 'classes %s / %s', class(r32), class(r64));
  % Each term is a product of a few roundings: the error of a sum of 30 terms stays below
  % 30 * 4 eps(single) times the sum of their magnitudes.
  bound = 30 * 4 * eps('single') * ((exp(-p * sqdist(x, y)) * abs(b'))');
  check(all(abs(double(r32(:)) - r64(:)) <= bound(:)), 'single vs double: %g > bound', ...
        max(abs(double(r32(:)) - r64(:)) - bound(:)));
  r_mixed = F(single(x), y, b, p);
  check(isa(r_mixed, 'single'), 'a single argument makes the call single');
  check_close(double(r_mixed), double(r32), 0, 0, 'mixed equals all single');
  % Gradients in single.
  e = randn(2, 40);
  g32 = feval(keops_grad(F, 'x'), single(x), single(y), single(b), single(p), single(e));
  g64 = gauss_grad_x(x, y, b, p, e);
  check(isa(g32, 'single'), 'single gradient class %s', class(g32));
  check_close(double(g32), g64, 1e-4, 1e-4 * max(abs(g64(:))), 'single gradient');
  % Indices in single.
  A = keops_kernel('Min_ArgMin_Reduction(SqDist(x,y),0)', 'x=Vi(3)', 'y=Vj(3)', ...
                   struct('backend', 'interpreter'));
  [v, i] = A(single(x), single(y));
  [~, iref] = min(sqdist(x, y), [], 2);
  check(isa(v, 'single') && isa(i, 'single'), 'single Min_ArgMin classes');
  check_close(double(i), iref' - 1, 0, 0, 'single ArgMin');
end
