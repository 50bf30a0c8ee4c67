export async function signal () {
  return 'quack'
}
