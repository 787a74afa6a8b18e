// base/internal/win_errno.h: Windows only. Win32 and Winsock error codes as the errno values
// weft reports everywhere (as std::errc): the IOCP reactor's results and the api's socket calls.

#ifndef WEFT_BASE_INTERNAL_WIN_ERRNO_H_
#define WEFT_BASE_INTERNAL_WIN_ERRNO_H_

#ifdef _WIN32
#include <windows.h>
#include <winsock2.h>

#include <cerrno>

namespace weft::base_internal {

// ErrnoOf: the errno for a GetLastError() or WSAGetLastError() value; EIO for the rest.
inline int ErrnoOf(DWORD e) {
  switch (e) {
    case ERROR_OPERATION_ABORTED:
      return ECANCELED;
    case WSAECONNRESET:
    case ERROR_NETNAME_DELETED:
      return ECONNRESET;
    case WSAECONNREFUSED:
    case ERROR_CONNECTION_REFUSED:
      return ECONNREFUSED;
    case WSAECONNABORTED:
    case ERROR_CONNECTION_ABORTED:
    case ERROR_REQUEST_ABORTED:
      return ECONNABORTED;
    case WSAENOTSOCK:
    case WSAEBADF:
    case ERROR_INVALID_HANDLE:
      return EBADF;
    case WSAEINVAL:
    case ERROR_INVALID_PARAMETER:
      return EINVAL;
    case WSAEFAULT:
    case ERROR_NOACCESS:
      return EFAULT;
    case WSAENOTCONN:
      return ENOTCONN;
    case WSAESHUTDOWN:
    case ERROR_BROKEN_PIPE:
    case ERROR_NO_DATA:
      return EPIPE;
    case WSAEMFILE:
    case ERROR_TOO_MANY_OPEN_FILES:
      return EMFILE;
    case WSAENOBUFS:
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_NO_SYSTEM_RESOURCES:
      return ENOMEM;
    case WSAETIMEDOUT:
    case ERROR_SEM_TIMEOUT:
      return ETIMEDOUT;
    case WSAEADDRINUSE:
      return EADDRINUSE;
    case WSAEADDRNOTAVAIL:
      return EADDRNOTAVAIL;
    case WSAENETUNREACH:
    case ERROR_NETWORK_UNREACHABLE:
      return ENETUNREACH;
    case WSAEHOSTUNREACH:
    case ERROR_HOST_UNREACHABLE:
      return EHOSTUNREACH;
    case WSAEISCONN:
      return EISCONN;
    case WSAEWOULDBLOCK:
      return EAGAIN;
    case WSAEMSGSIZE:
    case ERROR_MORE_DATA:
      return EMSGSIZE;
    case WSAEAFNOSUPPORT:
      return EAFNOSUPPORT;
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME:
      return ENOENT;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
      return EEXIST;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
      return EACCES;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
      return ENOSPC;
    case WSAEOPNOTSUPP:
      return EOPNOTSUPP;
    default:
      return EIO;
  }
}

}  // namespace weft::base_internal

#endif  // _WIN32
#endif  // WEFT_BASE_INTERNAL_WIN_ERRNO_H_
