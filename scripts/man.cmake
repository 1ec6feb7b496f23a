# Writes the CLI's man page: `${CLI} help --man` into ${OUT} (CMakeLists.txt).
execute_process(COMMAND ${CLI} help --man OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT})
  message(FATAL_ERROR "airlock help --man failed: ${rc}")
endif()
