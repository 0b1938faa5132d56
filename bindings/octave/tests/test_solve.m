% test_solve: tessel_solve's (alpha I + K) x = b against Octave's dense solve.
function test_solve()
  randn('seed', 6);
  x = randn(3, 60); b = randn(2, 60); p = 1.5; alpha = 0.3;
  F = keops_kernel('Sum_Reduction(Exp(-p*SqDist(x,y))*v,0)', 'x=Vi(3)', 'y=Vj(3)', 'v=Vj(2)', ...
                   'p=Pm(1)', struct('backend', 'interpreter'));
  [sol, info] = tessel_solve(F, 'v', alpha, x, x, b, p, struct('tol', 1e-10));
  ref = ((alpha * eye(60) + exp(-p * sqdist(x, x))) \ b')';
  check(info.converged, 'not converged: %d iterations, residual %g', info.iterations, ...
        info.residual);
  check_close(sol, ref, 1e-7, 1e-8, 'solve');
  % In single: float32 products, float64 CG vectors; the answer within float32's reach.
  [sol32, info32] = tessel_solve(F, 'v', alpha, single(x), single(x), single(b), p);
  check(isa(sol32, 'single') && info32.converged, 'single solve: %s, converged %d', ...
        class(sol32), info32.converged);
  check_close(double(sol32), ref, 1e-3, 1e-3 * max(abs(ref(:))), 'single solve');
  expect_error(@() tessel_solve(F, 'q', alpha, x, x, b, p), 'tessel:badArgument', ...
               'tessel_solve', '''q''');
end
