# cmake -DOUTPUT=... -DSOURCE_DIR=... -DGIT_EXECUTABLE=... -DVERSION=... -DTORCH=... -DCUDA=...
#       -DCUDA_KERNELS=... -DCUTLASS_KERNELS=... -DCUDA_ARCHITECTURES=... -DCXX11_ABI=... -P write_build_info.cmake
# Writes OUTPUT, the library's build metadata (CMakeLists.txt, target hypatia_build_info): the
# configure-time facts given as JSON values, plus SOURCE_DIR's git commit now ("-dirty" when tracked
# files differ from it; "unknown" outside a git checkout, e.g. from an sdist).
set(commit "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(commit "${head}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
# file(CONFIGURE) leaves OUTPUT untouched when its content is unchanged.
file(CONFIGURE OUTPUT "${OUTPUT}" @ONLY CONTENT [[{
  "version": "@VERSION@",
  "torch": "@TORCH@",
  "cuda": @CUDA@,
  "cuda_kernels": @CUDA_KERNELS@,
  "cutlass_kernels": @CUTLASS_KERNELS@,
  "cuda_architectures": [@CUDA_ARCHITECTURES@],
  "cxx11_abi": @CXX11_ABI@,
  "git_commit": "@commit@"
}
]])
