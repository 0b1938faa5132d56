% check: the tests' assertion: an error with `message` (sprintf arguments allowed) unless cond.
function check(cond, varargin)
  if ~all(cond(:))
    error('tessel:testFailed', varargin{:});
  end
end
