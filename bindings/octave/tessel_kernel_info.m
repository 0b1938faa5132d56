% tessel_kernel_info: the description of a keops_kernel function (what F() returns), or an error
% naming `who` when F is not one.
function info = tessel_kernel_info(F, who)
  if ~isa(F, 'function_handle')
    error('tessel:badArgument', ...
          '%s: the first argument must be a function from keops_kernel; got a %s', who, class(F));
  end
  % A keops_kernel function describes itself when called without arguments.
  try
    info = F();
  catch
    info = [];
  end
  if ~isstruct(info) || ~isfield(info, 'handle')
    error('tessel:badArgument', '%s: the first argument is not a keops_kernel function', who);
  end
end
