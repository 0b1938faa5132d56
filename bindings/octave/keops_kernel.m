% keops_kernel: a kernel reduction as a function handle, with KeOpsLab's calling convention.
%
% F = keops_kernel(formula, alias1, alias2, ..., [options])   (or the aliases first)
%   formula: a KeOps reduction text, e.g. 'Sum_Reduction(Exp(-p*SqDist(x,y))*b, 0)' (tag 0:
%            reduce over j, one result per point x_i; tag 1: over i). A formula without a
%            reduction is summed over j (KeOpsLab's old syntax; options.tagIJ = 1 sums over i).
%   aliases: 'x = Vi(3)', 'y = Vj(3)', 'b = Vj(1)', 'p = Pm(1)' (or Vi(index, dim), ...).
%   options: a struct, optional: backend ('auto', 'compiled', 'interpreter'), sum_scheme
%            ('block', 'kahan', 'direct'), index_base (0, KeOpsLab's and the default, or 1),
%            threads. KeOpsLab's tagCpuGpu, tag1D2D and device_id are accepted and ignored.
%
% res = F(x, y, b, p): the arguments in the order of the aliases; a Vi(D) or Vj(D) argument
% is a D x N array (one point per column), a Pm(D) argument a vector of D values. The result is
% D_out x N. All double gives double; any single argument makes the call single precision
% (computed in float32, result single). Min_ArgMin and KMin_ArgKMin give KeOpsLab's stacked
% array, or [values, indices] = F(...) when two outputs are asked for. Indices start at 0 as in
% KeOpsLab unless options.index_base = 1.
% info = F() describes the kernel (arguments, reduction, handle).
function F = keops_kernel(varargin)
  args = varargin;
  options = struct();
  if ~isempty(args) && isstruct(args{end})
    options = args{end};
    args(end) = [];
  end
  if isempty(args)
    error('tessel:badArgument', 'keops_kernel: expected a formula and its aliases');
  end
  for q = 1:numel(args)
    if ~ischar(args{q})
      error('tessel:badArgument', ...
            'keops_kernel: argument %d must be a string (a formula or an alias); got a %s', ...
            q, class(args{q}));
    end
  end
  % KeOpsLab's rule: the formula is the one text without '=', first or last.
  if isempty(strfind(args{end}, '='))
    formula = args{end};
    aliases = args(1:end-1);
  elseif isempty(strfind(args{1}, '='))
    formula = args{1};
    aliases = args(2:end);
  else
    error('tessel:badArgument', ...
          'keops_kernel: no formula found: every argument contains ''='' (aliases only)');
  end
  if isempty(strfind(formula, 'Reduction('))
    tag = 0;
    if isfield(options, 'tagIJ')
      tag = options.tagIJ;
    end
    formula = sprintf('Sum_Reduction(%s,%d)', formula, tag);
  end
  h = tessel_mex('new', formula, aliases, 'keops_kernel', options);
  % The handle itself calls the gateway: one crossing per call, no .m code in between.
  F = @(varargin) tessel_mex('eval', h, varargin{:});
end
