% gauss_kernel: the tests' one compiled formula, a Gaussian kernel product, with KeOpsLab's
% argument order (x, y, b, p); opts (optional) are keops_kernel's options.
function F = gauss_kernel(varargin)
  F = keops_kernel('Sum_Reduction(Exp(-p*SqDist(x,y))*b,0)', 'x=Vi(3)', 'y=Vj(3)', ...
                   'b=Vj(2)', 'p=Pm(1)', varargin{:});
end
