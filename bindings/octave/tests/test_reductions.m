% test_reductions: every reduction family by name (Min, Max, their Arg and pairs, KMin and its
% Arg and pair, LogSumExp with and without a weight, SumSoftMaxWeight) on both axes, against
% dense references; indices start at 0 as in KeOpsLab, at 1 with options.index_base = 1.
function test_reductions()
  randn('seed', 3);
  x = randn(2, 9); y = randn(2, 7);
  o = struct('backend', 'interpreter');
  for tag = 0:1
    % Tag 0 reduces over j (a result per x_i), tag 1 over i; the weight lives on the reduced side.
    if tag == 0
      d = sqdist(x, y); wcat = 'Vj'; w = rand(2, 7) + 0.5;
    else
      d = sqdist(x, y)'; wcat = 'Vi'; w = rand(2, 9) + 0.5;
    end
    al = {'x=Vi(2)', 'y=Vj(2)'};
    red = @(name, f) keops_kernel(sprintf('%s_Reduction(%s,%d)', name, f, tag), al{:}, o);
    what = @(s) sprintf('%s, tag %d', s, tag);
    [mn, imn] = min(d, [], 2);
    [mx, imx] = max(d, [], 2);
    [srt, isrt] = sort(d, 2);
    check_close(feval(red('Min', 'SqDist(x,y)'), x, y), mn', 0, 0, what('Min'));
    check_close(feval(red('Max', 'SqDist(x,y)'), x, y), mx', 0, 0, what('Max'));
    check_close(feval(red('ArgMin', 'SqDist(x,y)'), x, y), imn' - 1, 0, 0, what('ArgMin'));
    check_close(feval(red('ArgMax', 'SqDist(x,y)'), x, y), imx' - 1, 0, 0, what('ArgMax'));
    F = red('Min_ArgMin', 'SqDist(x,y)');
    [v, i] = F(x, y);
    check_close(v, mn', 0, 0, what('Min_ArgMin values'));
    check_close(i, imn' - 1, 0, 0, what('Min_ArgMin indices'));
    check_close(F(x, y), [mn'; imn' - 1], 0, 0, what('Min_ArgMin stacked (KeOpsLab)'));
    F = red('Max_ArgMax', 'SqDist(x,y)');
    check_close(F(x, y), [mx'; imx' - 1], 0, 0, what('Max_ArgMax stacked'));
    F = keops_kernel(sprintf('KMin_Reduction(SqDist(x,y),3,%d)', tag), al{:}, o);
    check_close(F(x, y), srt(:, 1:3)', 0, 0, what('KMin'));
    F = keops_kernel(sprintf('ArgKMin_Reduction(SqDist(x,y),3,%d)', tag), al{:}, o);
    check_close(F(x, y), isrt(:, 1:3)' - 1, 0, 0, what('ArgKMin'));
    F = keops_kernel(sprintf('KMin_ArgKMin_Reduction(SqDist(x,y),3,%d)', tag), al{:}, o);
    [v, i] = F(x, y);
    check_close(v, srt(:, 1:3)', 0, 0, what('KMin_ArgKMin values'));
    check_close(i, isrt(:, 1:3)' - 1, 0, 0, what('KMin_ArgKMin indices'));
    % KeOpsLab's one array: for each of the K best, the value then the index.
    stacked = zeros(6, size(d, 1));
    stacked(1:2:end, :) = srt(:, 1:3)';
    stacked(2:2:end, :) = isrt(:, 1:3)' - 1;
    check_close(F(x, y), stacked, 0, 0, what('KMin_ArgKMin stacked (KeOpsLab)'));
    check_close(feval(red('LogSumExp', '-SqDist(x,y)'), x, y), log(sum(exp(-d), 2))', ...
                1e-13, 1e-14, what('LogSumExp'));
    alw = [al, {['w=' wcat '(2)']}];
    F = keops_kernel(sprintf('LogSumExp_Reduction(-SqDist(x,y),%d,w)', tag), alw{:}, o);
    check_close(F(x, y, w), log(exp(-d) * w')', 1e-13, 1e-14, what('LogSumExp weighted'));
    F = keops_kernel(sprintf('SumSoftMaxWeight_Reduction(-SqDist(x,y),%d,w)', tag), alw{:}, o);
    check_close(F(x, y, w), ((exp(-d) * w') ./ sum(exp(-d), 2))', 1e-13, 1e-14, ...
                what('SumSoftMaxWeight'));
  end
  % 1-based indices on request, for Octave's own indexing.
  F = keops_kernel('ArgMin_Reduction(SqDist(x,y),0)', 'x=Vi(2)', 'y=Vj(2)', ...
                   struct('backend', 'interpreter', 'index_base', 1));
  [~, imn] = min(sqdist(x, y), [], 2);
  check_close(F(x, y), imn', 0, 0, 'ArgMin with index_base 1');
  F = keops_kernel('KMin_ArgKMin_Reduction(SqDist(x,y),2,0)', 'x=Vi(2)', 'y=Vj(2)', ...
                   struct('backend', 'interpreter', 'index_base', 1));
  [~, i] = F(x, y);
  [~, isrt] = sort(sqdist(x, y), 2);
  check_close(i, isrt(:, 1:2)', 0, 0, 'ArgKMin with index_base 1');
  % A vector formula: each component keeps its own K best, in row k * D + c (0-based), as
  % KeOpsLab lays them out.
  F = keops_kernel('KMin_ArgKMin_Reduction(x-y,2,0)', 'x=Vi(2)', 'y=Vj(2)', o);
  [v, i] = F(x, y);
  for c = 1:2
    [s, is] = sort(x(c, :)' - y(c, :), 2);
    what = sprintf('KMin_ArgKMin of a vector, component %d', c);
    check_close(v(c:2:end, :), s(:, 1:2)', 0, 0, [what ' values']);
    check_close(i(c:2:end, :), is(:, 1:2)' - 1, 0, 0, [what ' indices']);
  end
  % No Vj argument: the j axis has one row, as in KeOps (the sum over it is the formula itself);
  % no Vi argument: one output row. (They used to ask for a size argument the kernels lack.)
  F = keops_kernel('Sum_Reduction(x*p,0)', 'x=Vi(2)', 'p=Pm(1)', o);
  check_close(F(x, 3), 3 * x, 1e-15, 0, 'Sum over j with no Vj argument');
  F = keops_kernel('Sum_Reduction(y*p,0)', 'y=Vj(2)', 'p=Pm(1)', o);
  check_close(F(y, 2), 2 * sum(y, 2), 1e-14, 0, 'Sum over j with no Vi argument');
end
