% octave_overhead: the fixed cost of a cached tessel call from Octave, against the same call
% from C++.
%
% Usage (from the repository root, after scripts/test_octave.sh has built the MEX file):
%   octave-cli --eval "run('bench/octave_overhead.m')"
% Prints JSON lines: medians over batches of calls of an anonymous function calling a builtin
% (Octave's own floor), of the keops_kernel function handle and of the bare gateway call under
% it, at N = M = 1 and N = M = 1000, in double and single; then `build/tessel bench
% call-overhead` and `gauss-sum` at N = 1000 (C++, one line each). The case is the C++ bench's
% gauss-sum: Sum_j exp(-G |x_i - y_j|^2) b_j, D = 3.
root = fileparts(fileparts(mfilename('fullpath')));
addpath(fullfile(root, 'bindings', 'octave'), fullfile(root, 'build', 'octave'));
if isempty(getenv('TESSEL_CACHE_DIR'))
  setenv('TESSEL_CACHE_DIR', fullfile(root, 'build', 'test-cache'));
end

% Median seconds per call over `batches` batches, each timing enough calls to last ~20 ms.
function s = time_call(f, batches)
  f();
  reps = 1;
  while true
    t0 = tic;
    for k = 1:reps, f(); end
    if toc(t0) > 0.02 || reps >= 1e6, break; end
    reps = reps * 4;
  end
  t = zeros(batches, 1);
  for q = 1:batches
    t0 = tic;
    for k = 1:reps, f(); end
    t(q) = toc(t0) / reps;
  end
  s = median(t);
end

F = keops_kernel('Sum_Reduction(Exp(-G*SqDist(X,Y))*B,0)', 'X=Vi(3)', 'Y=Vj(3)', 'B=Vj(1)', ...
                 'G=Pm(1)');
h = F().handle;
rand('seed', 1);
% The floor under both: an anonymous function calling a builtin on the same arguments.
x = rand(3, 1);
printf('{"case": "octave-empty-call", "n": 1, "m": 1, "median_s": %.4g}\n', ...
       time_call(@() horzcat(x, x, x, x), 15));
for n = [1 1000]
  for cls = {'double', 'single'}
    x = cast(rand(3, n), cls{1}); y = cast(rand(3, n), cls{1}); b = cast(rand(1, n), cls{1});
    g = cast(16, cls{1});
    dtype = 'float64';
    if strcmp(cls{1}, 'single'), dtype = 'float32'; end
    printf(['{"case": "octave-kernel-call", "n": %d, "m": %d, "d": 3, "dtype": "%s", ' ...
            '"median_s": %.4g}\n'], n, n, dtype, time_call(@() F(x, y, b, g), 15));
    printf(['{"case": "octave-mex-call", "n": %d, "m": %d, "d": 3, "dtype": "%s", ' ...
            '"median_s": %.4g}\n'], n, n, dtype, ...
           time_call(@() tessel_mex('eval', h, x, y, b, g), 15));
  end
end

tool = fullfile(root, 'build', 'tessel');
if exist(tool, 'file')
  for dtype = {'float64', 'float32'}
    [~, out] = system(sprintf('%s bench call-overhead --dtype %s', tool, dtype{1}));
    lines = strsplit(out, "\n");
    printf('%s\n', lines{~cellfun(@isempty, strfind(lines, '"call-overhead"'))});
    [~, out] = system(sprintf(['%s bench gauss-sum --n 1000 --reps 15 --dtype %s ' ...
                               '--keep-cache --no-pykeops'], tool, dtype{1}));
    lines = strsplit(out, "\n");
    printf('%s\n', lines{~cellfun(@isempty, strfind(lines, '"gauss-sum"'))});
  end
else
  printf('# no %s here: run `build/tessel bench call-overhead` for the C++ figure\n', tool);
end
