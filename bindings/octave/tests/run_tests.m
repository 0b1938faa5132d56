% run_tests: runs every test_*.m in this folder and prints "N passed, M failed"; exits non-zero
% (from octave-cli) when one fails. Usage: octave-cli run_tests.m [mex folder]
function run_tests(mexdir)
  here = fileparts(mfilename('fullpath'));
  if nargin < 1
    mexdir = fullfile(here, '..', '..', '..', 'build', 'octave');
  end
  addpath(here, fullfile(here, '..'), mexdir);
  files = dir(fullfile(here, 'test_*.m'));
  passed = 0;
  failed = {};
  for q = 1:numel(files)
    name = files(q).name(1:end-2);
    t0 = tic;
    try
      feval(name);
      passed = passed + 1;
      printf('  ok    %-28s %6.2f s\n', name, toc(t0));
    catch err
      failed{end+1} = name;
      printf('  FAIL  %-28s %6.2f s\n        %s\n', name, toc(t0), err.message);
      for s = err.stack(:)'
        printf('        at %s line %d\n', s.name, s.line);
      end
    end
  end
  printf('%d passed, %d failed\n', passed, numel(failed));
  if ~isempty(failed)
    printf('failed: %s\n', strjoin(failed, ', '));
    exit(1);
  end
end
