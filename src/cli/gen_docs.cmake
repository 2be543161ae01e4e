# Makes the man pages and the bash completion from the built program
# (src/cli/cmd_meta.c): cmake -DNPUC=<npuc> -DOUT=<dir> -P gen_docs.cmake
# writes <dir>/man/man1/npuc.1, npuc-<command>.1 and
# <dir>/bash-completion/completions/npuc.
file(MAKE_DIRECTORY ${OUT}/man/man1 ${OUT}/bash-completion/completions)
execute_process(COMMAND ${NPUC} __man --list OUTPUT_VARIABLE cmds RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "npuc __man --list failed: ${rc}")
endif()
string(REPLACE "\n" ";" cmds "${cmds}")
execute_process(COMMAND ${NPUC} __man OUTPUT_FILE ${OUT}/man/man1/npuc.1 RESULT_VARIABLE rc)
foreach(c IN LISTS cmds)
  if(c AND rc EQUAL 0)
    execute_process(COMMAND ${NPUC} __man ${c} OUTPUT_FILE ${OUT}/man/man1/npuc-${c}.1 RESULT_VARIABLE rc)
  endif()
endforeach()
if(rc EQUAL 0)
  execute_process(COMMAND ${NPUC} __completion OUTPUT_FILE ${OUT}/bash-completion/completions/npuc
                  RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generating the man pages and completion failed: ${rc}")
endif()
