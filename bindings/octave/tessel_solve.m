% tessel_solve: solves (alpha I + K) x = b for a kernel K, by conjugate gradient (KeOps's
% KernelSolve).
%
% [x, info] = tessel_solve(F, var, alpha, args..., [options])
%   F: a keops_kernel function whose reduction is a Sum linear in the argument named var, e.g.
%      keops_kernel('Sum_Reduction(Exp(-p*SqDist(x,y))*b, 0)', 'x=Vi(3)', 'y=Vj(3)', 'b=Vj(1)',
%      'p=Pm(1)') with var = 'b' and y = x (a symmetric positive definite system).
%   args: F's arguments; the one in var's place is the right-hand side b.
%   options: struct with tol (default 1e-6, relative residual) and maxiter (0: the default).
%   x: the solution, shaped like b. info: iterations, residual (relative) and converged.
function [x, info] = tessel_solve(F, var, alpha, varargin)
  k = tessel_kernel_info(F, 'tessel_solve');
  args = varargin;
  tol = 1e-6;
  maxiter = 0;
  if ~isempty(args) && isstruct(args{end})
    opts = args{end};
    args(end) = [];
    if isfield(opts, 'tol'), tol = opts.tol; end
    if isfield(opts, 'maxiter'), maxiter = opts.maxiter; end
  end
  [x, it, res, conv] = tessel_mex('solve', k.handle, var, alpha, tol, maxiter, args{:});
  info = struct('iterations', it, 'residual', res, 'converged', conv);
end
