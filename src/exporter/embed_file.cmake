# Writes OUT: a C++ source defining `NAME` (the bytes of IN) and `NAME_size`.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "// Generated from ${IN} by embed_file.cmake.\n#include <cstddef>\nextern const unsigned char ${NAME}[];\nextern const std::size_t ${NAME}_size;\nconst unsigned char ${NAME}[] = {${bytes}};\nconst std::size_t ${NAME}_size = ${size};\n")
