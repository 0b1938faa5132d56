% test_errors: bad inputs raise Octave errors (never a crash or a silent answer) whose messages
% name the function, the argument and what was expected.
function test_errors()
  o = struct('backend', 'interpreter');
  F = gauss_kernel(o);
  x = randn(3, 5); y = randn(3, 4); b = randn(2, 4); p = 0.5;
  bad = 'tessel:badArgument';
  % Wrong dimension (D), wrong numbers of points, a parameter of the wrong length.
  expect_error(@() F(x(1:2, :), y, b, p), bad, 'keops_kernel', '''x'' (Vi(3))', '3 x N', '2 x 5');
  expect_error(@() F(x', y, b, p), bad, '''x''', '5 x 3');
  expect_error(@() F(x, y, randn(2, 3), p), bad, '''b''', '3 points', '''y'' has 4');
  expect_error(@() F(x, y, b, [1 2]), bad, '''p'' (Pm(1))', 'vector of 1 value');
  expect_error(@() F(x, y, b, p, p), bad, 'expected 4 arguments (x, y, b, p), got 5');
  expect_error(@() F(x, y), bad, 'expected 4 arguments', 'got 2');
  expect_error(@() F(x, y, b, randn(1, 1, 1, 2)), bad, '''p''');
  expect_error(@() F(zeros(3, 2, 2), y, b, p), bad, '''x''', 'matrix');
  % Not numbers: text, cells, logicals, integers, complex, sparse.
  expect_error(@() F('abc', y, b, p), bad, '''x''', 'numeric', 'char');
  expect_error(@() F({x}, y, b, p), bad, '''x''', 'cell');
  expect_error(@() F(x, y, b, true), bad, '''p''', 'logical');
  expect_error(@() F(int32(x), y, b, p), bad, '''x''', 'int32');
  expect_error(@() F(x + 1i, y, b, p), bad, '''x''', 'complex');
  expect_error(@() F(x, y, b, sparse(p)), bad, '''p''', 'sparse');
  expect_error(@() two_outputs(F, x, y, b, p), bad, 'gives 1 output(s); 2 were requested');
  % Bad formulas and aliases (the core's parser: tessel:error).
  expect_error(@() keops_kernel('Sum_Reduction(Foo(x),0)', 'x=Vi(3)'), 'tessel:error', ...
               'keops_kernel', 'unknown function ''Foo''');
  expect_error(@() keops_kernel('Sum_Reduction(x+z,0)', 'x=Vi(3)'), 'tessel:error', ...
               'keops_kernel', 'z');
  expect_error(@() keops_kernel('Sum_Reduction(x,0)', 'x=Vq(3)'), 'tessel:error', 'Vq');
  expect_error(@() keops_kernel('Nope_Reduction(x,0)', 'x=Vi(3)'), 'tessel:error', 'Nope');
  expect_error(@() keops_kernel('Sum_Reduction(x,0'), 'tessel:error', 'keops_kernel');
  expect_error(@() keops_kernel('x=Vi(3)', 'y=Vj(3)'), bad, 'keops_kernel', 'no formula');
  expect_error(@() keops_kernel('Sum_Reduction(x,0)', 3), bad, 'keops_kernel', 'argument 2');
  expect_error(@() keops_kernel(), bad, 'keops_kernel', 'formula');
  expect_error(@() keops_kernel('Sum_Reduction(x,0)', 'x=Vi(3)', struct('nope', 1)), bad, ...
               'unknown option ''nope''');
  expect_error(@() keops_kernel('Sum_Reduction(x,0)', 'x=Vi(3)', struct('threads', -1)), bad, ...
               'option threads');
  expect_error(@() keops_kernel('Sum_Reduction(x,0)', 'x=Vi(3)', struct('backend', 'gpu9')), ...
               'tessel:error', 'backend');
  % keops_grad: unknown variable, not a kernel.
  expect_error(@() keops_grad(F, 'z'), bad, 'keops_grad', 'no argument named ''z''', 'x, y, b, p');
  expect_error(@() keops_grad(F, 'Vj(1,2)'), bad, 'keops_grad', 'no argument named ''Vj(1,2)''');
  expect_error(@() keops_grad(@sin, 'x'), bad, 'keops_grad');
  expect_error(@() keops_grad(3, 'x'), bad, 'keops_grad', 'double');
  G = keops_grad(F, 'x');
  expect_error(@() G(x, y, b, p, randn(3, 5)), bad, 'keops_grad', '''eta'' (Vi(2))');
  % Gateway misuse: unknown command, a stale or made-up handle.
  expect_error(@() tessel_mex('frobnicate'), bad, 'unknown command');
  expect_error(@() tessel_mex('eval', 12345, x), bad, 'no longer valid');
end

function two_outputs(F, varargin)
  [~, ~] = F(varargin{:});
end
