# Project-wide compiler flags: warnings (as errors by default) and sanitizer builds.
add_compile_definitions(C4_VERSION="${PROJECT_VERSION}")
add_compile_options(
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion -Wnull-dereference
  -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
# -Wold-style-cast etc. are C++ only; strip them for C sources.
set(C4_CXX_ONLY_WARNINGS -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual)
foreach(flag IN LISTS C4_CXX_ONLY_WARNINGS)
  get_directory_property(opts COMPILE_OPTIONS)
  list(REMOVE_ITEM opts ${flag})
  list(APPEND opts $<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${opts}")
endforeach()
if(C4_WERROR)
  add_compile_options(-Werror)
endif()

if(C4_SANITIZE_ADDRESS)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
if(C4_SANITIZE_THREAD)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
