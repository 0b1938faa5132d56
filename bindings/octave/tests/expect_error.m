% expect_error: f() must raise an error whose identifier is id and whose message contains every
% text in varargin (a clear message that names the function, the argument, what was expected).
function expect_error(f, id, varargin)
  try
    f();
  catch err
    check(strcmp(err.identifier, id), 'identifier %s, expected %s (message: %s)', ...
          err.identifier, id, err.message);
    for q = 1:numel(varargin)
      check(~isempty(strfind(err.message, varargin{q})), ...
            'the message "%s" does not contain "%s"', err.message, varargin{q});
    end
    return;
  end
  error('tessel:testFailed', 'no error raised; expected %s with "%s"', id, ...
        strjoin(varargin, '", "'));
end
