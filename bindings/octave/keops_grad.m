% keops_grad: the gradient of a keops_kernel function with respect to one of its arguments.
%
% G = keops_grad(F, var): var is the argument's alias name ('x'), or its alias form with an
% index ('Vi(0,3)'), as in KeOpsLab. G takes F's arguments followed by one more, the cotangent:
% an array shaped like F's (first) output, D_out x N. G's result is shaped like var: D x N, or
% D x 1 for a parameter (summed over every point, as in KeOpsLab).
% keops_grad(G, name) differentiates again (second order); G's extra argument is named 'eta'
% ('eta2', ... when taken), so it can be differentiated too.
function G = keops_grad(F, var)
  info = tessel_kernel_info(F, 'keops_grad');
  if ~ischar(var)
    error('tessel:badArgument', ...
          'keops_grad: the variable must be an alias name (a string); got a %s', class(var));
  end
  eta = 'eta';
  q = 1;
  while any(strcmp(info.args, eta))
    q = q + 1;
    eta = sprintf('eta%d', q);
  end
  h = tessel_mex('grad', info.handle, var, eta);
  G = @(varargin) tessel_mex('eval', h, varargin{:});
end
