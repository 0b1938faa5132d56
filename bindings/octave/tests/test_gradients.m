% test_gradients: keops_grad for every argument of a Gaussian kernel product (a point, a weight,
% a parameter) against dense gradients, and a second order (grad of grad) against finite
% differences of the dense gradient.
function test_gradients()
  randn('seed', 2);
  x = randn(3, 25); y = randn(3, 20); b = randn(2, 20); p = 0.6; e = randn(2, 25);
  k = exp(-p * sqdist(x, y));
  wk = (e' * b) .* k;
  % Compiled, the one gradient kernel this suite compiles.
  F = gauss_kernel();
  Gx = keops_grad(F, 'x');
  check_close(Gx(x, y, b, p, e), gauss_grad_x(x, y, b, p, e), 1e-11, 1e-13, 'grad x');
  % The others with the interpreter: same formulas, no compile.
  Fi = gauss_kernel(struct('backend', 'interpreter'));
  Gy = keops_grad(Fi, 'y');
  check_close(Gy(x, y, b, p, e), 2 * p * (x * wk - y .* sum(wk, 1)), 1e-11, 1e-13, 'grad y');
  Gb = keops_grad(Fi, 'b');
  check_close(Gb(x, y, b, p, e), e * k, 1e-11, 1e-13, 'grad b');
  Gp = keops_grad(Fi, 'p');
  gp = Gp(x, y, b, p, e);
  check(isequal(size(gp), [1 1]), 'grad p: a parameter''s gradient is D x 1, got %s', ...
        mat2str(size(gp)));
  check_close(gp, -sum(sum(wk .* sqdist(x, y))), 1e-11, 1e-13, 'grad p');
  % KeOpsLab's other spelling of the variable: its alias form, with an explicit index.
  Gb2 = keops_grad(Fi, 'Vj(2,2)');
  check_close(Gb2(x, y, b, p, e), e * k, 1e-11, 1e-13, 'grad b by Vj(2,2)');
  % The gradient kernel takes F's arguments and then the cotangent, named eta.
  check(isequal(Gy().args, {'x', 'y', 'b', 'p', 'eta'}), 'grad args: %s', strjoin(Gy().args));
  % Second order: d/dy <u, dF/dx . e>, against central differences of the dense gradient.
  Gxi = keops_grad(Fi, 'x');
  H = keops_grad(Gxi, 'y');
  check(strcmp(H().args{end}, 'eta2'), 'second cotangent name: %s', H().args{end});
  u = randn(3, 25); dy = randn(3, 20); h = 1e-5;
  phi = @(yy) sum(sum(u .* gauss_grad_x(x, yy, b, p, e)));
  fd = (phi(y + h * dy) - phi(y - h * dy)) / (2 * h);
  hv = H(x, y, b, p, e, u);
  check(isequal(size(hv), size(y)), 'grad of grad: size %s', mat2str(size(hv)));
  check(abs(sum(hv(:) .* dy(:)) - fd) <= 1e-6 * max(1, abs(fd)), ...
        'grad of grad: %.12g, finite differences %.12g', sum(hv(:) .* dy(:)), fd);
  % A second derivative for a parameter, also summed: d/dp <u, dF/dx . e>.
  Hp = keops_grad(Gxi, 'p');
  fdp = (sum(sum(u .* gauss_grad_x(x, y, b, p + h, e))) - ...
         sum(sum(u .* gauss_grad_x(x, y, b, p - h, e)))) / (2 * h);
  check_close(Hp(x, y, b, p, e, u), fdp, 1e-6, 1e-8, 'grad of grad for p');
end
