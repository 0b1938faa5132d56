% gauss_grad_x: the dense reference of keops_grad(gauss_kernel, 'x') with cotangent e: the
% gradient of <e, sum_j exp(-p |x_i - y_j|^2) b_j> with respect to x, 3 x Nx.
function g = gauss_grad_x(x, y, b, p, e)
  wk = (e' * b) .* exp(-p * sqdist(x, y));
  g = -2 * p * (x .* sum(wk, 2)' - y * wk');
end
