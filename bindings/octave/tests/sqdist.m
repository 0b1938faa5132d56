% sqdist: the dense Nx x Ny matrix of squared distances between the columns of x and of y
% (the tests' reference; KeOpsLab's D x N layout). Coordinate by coordinate, so that no
% cancellation blurs the comparisons of the Min / ArgMin tests.
function d = sqdist(x, y)
  d = zeros(size(x, 2), size(y, 2));
  for k = 1:size(x, 1)
    d = d + (x(k, :)' - y(k, :)) .^ 2;
  end
end
