# Helpers every folder uses to declare tests and benchmarks.
#
# esd_add_test(NAME name SOURCES a.c ... [LIBS lib ...] [LABELS unit ...]
#              [TIMEOUT seconds] [ARGS ...] [ENV VAR=value ...])
# Builds a test executable and registers it with ctest. Exit code 77 means
# skipped (the machine lacks what the test needs: huge pages, a GPU, DPDK,
# root); every test runs under a timeout (default 60 s).
# Labels in use: unit, integration, slow, needs-hugepages, needs-gpu,
# needs-root, needs-dpdk.
# Tests labelled needs-dpdk poll their ports and are timed by their peers'
# keepalives and link timeouts: never two at once (ctest -j), so that one
# does not starve another of the cores.
function(esd_dpdk_lock name labels)
	if("needs-dpdk" IN_LIST labels)
		set_tests_properties(${name} PROPERTIES RESOURCE_LOCK dpdk)
	endif()
endfunction()

# The test's COST from ESD_TEST_COSTS (name seconds ...; tests/CMakeLists.txt),
# where it is listed: ctest -j starts the costly ones first.
function(esd_test_cost name)
	list(FIND ESD_TEST_COSTS ${name} i)
	if(i GREATER -1)
		math(EXPR i "${i} + 1")
		list(GET ESD_TEST_COSTS ${i} cost)
		set_tests_properties(${name} PROPERTIES COST ${cost})
	endif()
endfunction()

function(esd_add_test)
	cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS;ENV" ${ARGN})
	if(NOT CMOCKA_FOUND)
		return()
	endif()
	if(NOT T_TIMEOUT)
		set(T_TIMEOUT 60)
	endif()
	if(NOT T_LABELS)
		set(T_LABELS unit)
	endif()
	add_executable(${T_NAME} ${T_SOURCES})
	target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} esd_testutil PkgConfig::CMOCKA)
	set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
	add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
	set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
		SKIP_RETURN_CODE 77 LABELS "${T_LABELS}")
	esd_dpdk_lock(${T_NAME} "${T_LABELS}")
	esd_test_cost(${T_NAME})
	if(T_ENV)
		set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENV}")
	endif()
endfunction()

# esd_add_script_test(NAME name COMMAND cmd ... [LABELS ...] [TIMEOUT s] [ENV ...])
# A test that is a script or a tool invocation rather than a cmocka binary.
function(esd_add_script_test)
	cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS;ENV" ${ARGN})
	if(NOT T_TIMEOUT)
		set(T_TIMEOUT 60)
	endif()
	if(NOT T_LABELS)
		set(T_LABELS integration)
	endif()
	add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
	set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
		SKIP_RETURN_CODE 77 LABELS "${T_LABELS}")
	esd_dpdk_lock(${T_NAME} "${T_LABELS}")
	esd_test_cost(${T_NAME})
	if(T_ENV)
		set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENV}")
	endif()
endfunction()

# esd_python_trainer_env(OUT_VAR)
# The environment under which /usr/bin/python3 loads this tree's libesd.so
# (the Python binding, the PyTorch trainers): ESD_LIB, and in a sanitizer
# build libasan (and libstdc++, which torch loads later: libasan's
# exception interceptor must find its __cxa_throw at start) preloaded, leak
# checks off (the interpreter's allocations are not ours). Without a
# libasan.so to preload it sets ESD_PYTORCH_SKIP to the reason.
function(esd_python_trainer_env out)
	set(_env ESD_LIB=$<TARGET_FILE:esd>)
	if(ESD_SANITIZE)
		execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
			OUTPUT_VARIABLE _asan OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
		execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libstdc++.so.6
			OUTPUT_VARIABLE _cxx OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
		if(_asan AND IS_ABSOLUTE "${_asan}" AND EXISTS "${_asan}")
			set(_preload ${_asan})
			if(_cxx AND IS_ABSOLUTE "${_cxx}" AND EXISTS "${_cxx}")
				string(APPEND _preload ":${_cxx}")
			endif()
			list(APPEND _env LD_PRELOAD=${_preload} ASAN_OPTIONS=detect_leaks=0)
		else()
			list(APPEND _env "ESD_PYTORCH_SKIP=sanitizer build: no libasan.so to preload into /usr/bin/python3")
		endif()
	endif()
	set(${out} ${_env} PARENT_SCOPE)
endfunction()

# esd_add_fuzz(NAME fuzz_x SOURCES a.c ... [LIBS lib ...] [CORPUS dir])
# A libFuzzer target (only with -DESD_FUZZ=ON, which needs clang), with
# ASan and UBSan, built as ${CMAKE_BINARY_DIR}/fuzz/<name>. CORPUS is the
# committed corpus its runs start from and grow (scripts/fuzz.sh); the
# same entry point replays it as a ctest test in every build, declared
# beside the target. Sources to instrument are compiled into the target,
# not taken from an uninstrumented library.
function(esd_add_fuzz)
	cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS" ${ARGN})
	if(NOT ESD_FUZZ)
		return()
	endif()
	if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
		message(FATAL_ERROR "ESD_FUZZ=ON needs clang (CC=clang cmake ...)")
	endif()
	set(_san -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
	add_executable(${F_NAME} ${F_SOURCES})
	target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
	target_compile_options(${F_NAME} PRIVATE ${_san})
	target_link_options(${F_NAME} PRIVATE ${_san})
	set_target_properties(${F_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
	set_property(GLOBAL APPEND PROPERTY ESD_FUZZ_TARGETS "${F_NAME}\t${F_CORPUS}")
endfunction()

# esd_fuzz_manifest(): after every folder, write fuzz/targets.tsv (one line
# per esd_add_fuzz target: name, tab, corpus) for scripts/fuzz.sh, and the
# target `fuzz` that builds them all.
function(esd_fuzz_manifest)
	if(NOT ESD_FUZZ)
		return()
	endif()
	get_property(_list GLOBAL PROPERTY ESD_FUZZ_TARGETS)
	set(_text "")
	add_custom_target(fuzz)
	foreach(_line ${_list})
		string(APPEND _text "${_line}\n")
		string(REGEX REPLACE "\t.*" "" _name "${_line}")
		add_dependencies(fuzz ${_name})
	endforeach()
	file(WRITE ${CMAKE_BINARY_DIR}/fuzz/targets.tsv "${_text}")
endfunction()
