/* fault.h - fault-injection points for the chaos tests (issue 20).
 *
 *     FAULT_POINT("create.after_jail");
 *
 * is nothing at all unless the build defines AIRLOCK_TEST_FAULTS (the CMake
 * option of that name: on in the Debug and RelWithDebInfo builds `make test`
 * uses, off in Release, so shipped binaries hold no point). Compiled in, a
 * point does nothing either unless the environment arms it:
 *
 *   AIRLOCK_FAULT=NAME[,NAME...]   the process SIGKILLs itself at each NAME,
 *                                  every time it gets there;
 *   AIRLOCK_FAULT=NAME:FILE        ... only when FILE exists (removed first:
 *                                  one shot, armed from outside);
 *   AIRLOCK_FAULT_DIR=DIR          the point NAME fires when DIR/NAME exists,
 *                                  which it removes first (one shot). Its
 *                                  content says what happens: empty or
 *                                  "kill": SIGKILL itself; "hold": write its
 *                                  pid to DIR/NAME.held and wait (at most
 *                                  120 s) until that file is gone, so that a
 *                                  test can kill -9 any other process right
 *                                  at this point and then let it go on.
 *
 * SIGKILL, not exit: no atexit handler, no flush, no cleanup - what a crash
 * or the OOM killer leaves behind is what the tests must recover from. */
#ifndef AIRLOCK_FAULT_H
#define AIRLOCK_FAULT_H

#ifdef AIRLOCK_TEST_FAULTS
void fault_point(const char *name);
#define FAULT_POINT(name) fault_point(name)
#else
#define FAULT_POINT(name) ((void)0)
#endif

#endif
