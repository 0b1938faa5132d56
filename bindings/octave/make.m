% make: builds the MEX gateway with MATLAB's mex (Octave: bindings/octave/build.sh instead).
%
% Run from bindings/octave in MATLAB after building the C++ library (cmake target tessel) into
% <repository>/build; the MEX file lands next to this file, with an rpath to that library.
% MATLAB's mex needs a C++20 compiler: set one with `mex -setup C++` first.
function make()
  here = fileparts(mfilename('fullpath'));
  root = fullfile(here, '..', '..');
  lib = fullfile(root, 'build');
  if ~exist(fullfile(lib, 'libtessel.so'), 'file') && ...
     ~exist(fullfile(lib, 'libtessel.dylib'), 'file')
    error('tessel:build', 'make: no libtessel in %s; build the cmake target tessel first', lib);
  end
  mex('-R2018a', 'CXXFLAGS=$CXXFLAGS -std=c++20', ['-I' fullfile(root, 'include')], ...
      ['-L' lib], '-ltessel', ['LDFLAGS=$LDFLAGS -Wl,-rpath,' lib], ...
      '-outdir', here, fullfile(here, 'tessel_mex.cpp'));
end
