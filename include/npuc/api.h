/*
 * npuc/api.h - NPUC_API marks what libnpuc exports.
 *
 * The library is compiled with -fvisibility=hidden (CMakeLists.txt), so only
 * declarations marked NPUC_API are visible to programs linking libnpuc.so;
 * the library's private npuc__* functions stay inside it.  Every public
 * header includes this one.
 */
#ifndef NPUC_API_H
#define NPUC_API_H

#if defined(_WIN32)
#define NPUC_API
#elif defined(__GNUC__) && defined(NPUC_BUILDING_LIBRARY)
#define NPUC_API __attribute__((visibility("default")))
#else
#define NPUC_API
#endif

#endif
