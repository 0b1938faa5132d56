% test_sum_values: a Gaussian kernel product against the dense Octave product, both axes,
% KeOpsLab's argument orders and its old syntax without a reduction.
function test_sum_values()
  randn('seed', 1);
  x = randn(3, 40); y = randn(3, 30); b = randn(2, 30); p = 0.7;
  ref = (exp(-p * sqdist(x, y)) * b')';
  F = gauss_kernel();
  check_close(F(x, y, b, p), ref, 1e-12, 1e-14, 'compiled Sum');
  % The formula last, as in KeOpsLab's examples; the handle is the same kernel.
  G = keops_kernel('x=Vi(3)', 'y=Vj(3)', 'b=Vj(2)', 'p=Pm(1)', ...
                   'Sum_Reduction(Exp(-p*SqDist(x,y))*b,0)');
  check_close(G(x, y, b, p), ref, 1e-12, 1e-14, 'formula last');
  check(G().handle == F().handle, 'the same texts must give the cached kernel');
  % Tag 1: reduce over i, one result per y_j; parameters as a column or a row.
  o = struct('backend', 'interpreter');
  H = keops_kernel('Sum_Reduction(Exp(-p*SqDist(x,y))*a,1)', 'x=Vi(3)', 'y=Vj(3)', ...
                   'a=Vi(2)', 'p=Pm(2)', o);
  a = randn(2, 40); p2 = [0.5; 2];  % Exp of a 2-vector times a: row k uses p2(k)
  d = sqdist(x, y);
  ref1 = [a(1, :) * exp(-p2(1) * d); a(2, :) * exp(-p2(2) * d)];
  check_close(H(x, y, a, p2), ref1, 1e-12, 1e-14, 'Sum over i');
  check_close(H(x, y, a, p2'), ref1, 1e-12, 1e-14, 'Pm as a row');
  % KeOpsLab's old syntax: no reduction means a Sum over j (options.tagIJ = 1: over i).
  K = keops_kernel('Exp(-SqDist(x,y))*b', 'x=Vi(3)', 'y=Vj(3)', 'b=Vj(2)', o);
  check_close(K(x, y, b), (exp(-sqdist(x, y)) * b')', 1e-12, 1e-14, 'old syntax');
  o.tagIJ = 1;
  K1 = keops_kernel('Exp(-SqDist(x,y))*a', 'x=Vi(3)', 'y=Vj(3)', 'a=Vi(2)', o);
  check_close(K1(x, y, a), (exp(-sqdist(x, y))' * a')', 1e-12, 1e-14, 'old syntax tagIJ');
  % Vx / Vy are KeOps's older names of Vi / Vj; a scalar formula on 1 x N rows or N x 1 columns.
  L = keops_kernel('Sum_Reduction(SqDist(u,v),0)', 'u=Vx(1)', 'v=Vy(1)', o);
  u = randn(1, 5); v = randn(1, 4);
  check_close(L(u, v), sum(sqdist(u, v), 2)', 1e-12, 1e-14, 'Vx/Vy rows');
  check_close(L(u', v'), sum(sqdist(u, v), 2)', 1e-12, 1e-14, 'Vx/Vy columns');
  % F() describes the kernel.
  info = F();
  check(isequal(info.args, {'x', 'y', 'b', 'p'}) && isequal(info.dims, [3 3 2 1]), 'F() args');
  check(strcmp(info.op, 'Sum') && info.axis == 1, 'F() op/axis');
end
